<?xml version="1.0"?>
<!-- Number formatting: format-number, xsl:number, sums, division, rounding. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="xml" indent="yes"/>
  <xsl:decimal-format name="eu" decimal-separator="," grouping-separator="."/>
  <xsl:template match="/">
    <report count="{count(//order)}">
      <total><xsl:value-of select="format-number(sum(//order/price), '#,##0.00')"/></total>
      <total-eu><xsl:value-of select="format-number(sum(//order/price), '#.##0,000', 'eu')"/></total-eu>
      <mean><xsl:value-of select="sum(//order/price) div count(//order)"/></mean>
      <rounded><xsl:value-of select="round(sum(//order/volume) div 7)"/></rounded>
      <percent><xsl:value-of select="format-number(0.1234, '0.0%')"/></percent>
      <xsl:for-each select="//order[position() &lt;= 12]">
        <line><xsl:number format="i. "/><xsl:number value="position()" format="A"/>
          <xsl:value-of select="concat(' ', floor(price), ' ', ceiling(price), ' ', price * volume)"/></line>
      </xsl:for-each>
      <nan><xsl:value-of select="number('x')"/></nan>
      <inf><xsl:value-of select="1 div 0"/></inf>
    </report>
  </xsl:template>
</xsl:stylesheet>
